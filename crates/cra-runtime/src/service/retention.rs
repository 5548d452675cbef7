//! Retention (TRACE §4.6): the configured policy applied to the runtime's store at the runtime's
//! clock. Every removal is recorded first in the operator audit chain
//! ([`cra_store::retention`] holds the rule and its crash argument). `cra serve` runs
//! [`apply`] on a schedule when `[retention]` is configured ([`scheduled`]); `cra trace
//! retention` runs the same rule once against a stopped server's store.

use std::sync::Arc;
use std::time::Duration;

use cra_store::RetentionPolicy;
use cra_store::retention::{OPERATOR_AGENT, OPERATOR_AUDIT_SESSION, apply_retention};

use crate::error::{ApiResult, run_blocking};
use crate::state::Runtime;
use crate::tracelog::chain_error;

/// What one run removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionRun {
    /// Sessions whose last event was before this instant (wire form) were eligible.
    pub cutoff: String,
    /// The sessions removed.
    pub removed: Vec<String>,
}

/// Applies `policy` once: records, then removes, every ended session whose last event is older
/// than it keeps. The audit event goes to the live stream too.
pub async fn apply(rt: &Runtime, policy: RetentionPolicy) -> ApiResult<RetentionRun> {
    // Under the operator chain's lock, which also starts the chain (its record and
    // `session.started`) the first time.
    let _chain = super::operator::lock(rt).await?;
    let store = rt.backends.retention.clone();
    let clock = rt.clock.clone();
    let ids = rt.ids.clone();
    let report = run_blocking("the retention task failed", move || {
        apply_retention(&*store, &policy, &*clock, &*ids)
    })
    .await?
    .map_err(chain_error)?;
    if let Some(event) = &report.audit_event {
        rt.metrics.add_events(1);
        let events = std::slice::from_ref(event);
        rt.hub
            .publish(OPERATOR_AUDIT_SESSION, OPERATOR_AGENT, events);
    }
    Ok(RetentionRun {
        cutoff: report.cutoff,
        removed: report.removed.into_iter().map(|s| s.session_id).collect(),
    })
}

/// While this replica leads (`leading`: always on the embedded store; see `crate::leader`), runs
/// [`apply`] at once and then every `every`, for as long as the server runs; reports each run on
/// `runs` (how a test waits for one without sleeping) and logs what it removed. A failed run is
/// logged and tried again at the next tick. A replica that starts leading runs at once.
pub async fn scheduled(
    rt: Arc<Runtime>,
    mut leading: tokio::sync::watch::Receiver<bool>,
    policy: RetentionPolicy,
    every: Duration,
    runs: tokio::sync::watch::Sender<Option<ApiResult<RetentionRun>>>,
) {
    loop {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => run_once(&rt, policy, &runs).await,
                changed = leading.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            if !*leading.borrow() {
                break;
            }
        }
    }
}

/// One scheduled run: applied, logged, reported.
async fn run_once(
    rt: &Arc<Runtime>,
    policy: RetentionPolicy,
    runs: &tokio::sync::watch::Sender<Option<ApiResult<RetentionRun>>>,
) {
    let outcome = apply(rt, policy).await;
    match &outcome {
        Ok(run) if run.removed.is_empty() => {}
        Ok(run) => tracing::info!(
            removed = run.removed.len(),
            cutoff = %run.cutoff,
            "retention removed ended sessions (recorded in {OPERATOR_AUDIT_SESSION})"
        ),
        Err(e) => tracing::warn!(error = %e, "retention run failed; retrying at the next tick"),
    }
    runs.send_replace(Some(outcome));
}
