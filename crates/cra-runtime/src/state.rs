//! The shared state every handler sees: configuration, the injected clock and id generator,
//! authentication, rate limiting, metrics, and the protocol back ends.

use std::ops::Deref;
use std::sync::Arc;

use cra_wire::{Clock, IdGenerator};

use crate::backend::Backends;
use crate::config::RuntimeConfig;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;
use crate::tracelog::Hub;

/// Everything the runtime holds, shared by all requests.
#[derive(Debug)]
pub struct Runtime {
    /// The configuration in force.
    pub config: RuntimeConfig,
    /// "Now", injected.
    pub clock: Arc<dyn Clock>,
    /// New ids, injected.
    pub ids: Arc<dyn IdGenerator>,
    /// Credentials to actors, swapped whole when the keys file or JWT settings reload.
    pub auth: crate::credentials::Credentials,
    /// Per-key request limits.
    pub limiter: RateLimiter,
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// When this process started serving (wire form).
    pub started_at: String,
    /// The stores.
    pub backends: Backends,
    /// Live TRACE subscribers.
    pub hub: Arc<Hub>,
    /// The HTTP client of `http` executors.
    pub http: reqwest::Client,
    /// The Relay service over `backends.relay`, built once at start so its callsign sequence
    /// advances across calls.
    pub relay: cra_relay::Relay,
    /// The atlases in force (swapped whole on reload).
    pub atlas_state: std::sync::RwLock<Arc<crate::atlases::AtlasState>>,
    /// Where every change of the atlases in force is committed first (the store's atlas
    /// catalog); `None` for a front door on a data directory, whose atlases are only its own.
    pub atlas_catalog: Option<Arc<dyn cra_store::AtlasCatalog>>,
    /// The settable clock `clock` reads, when the server runs with `test_clock = true`.
    pub test_clock: Option<Arc<crate::conformance::TestClock>>,
    /// Serialises this process's writes to the operator audit chain
    /// ([`crate::service::operator`]), and holds whether this process has seen it started.
    pub operator_chain: tokio::sync::Mutex<bool>,
    /// Which earlier resolution answers an identical resolve ([`cra_carp::cache`]), sized by
    /// `resolution_cache_entries`; `None` when that is 0 (no resolve then computes a key).
    pub resolution_cache: Option<Arc<cra_carp::cache::ResolutionCache>>,
    /// Cancelled when the server begins to stop: long-lived streams that would hold a graceful
    /// shutdown open (`/mcp`'s) end on it.
    pub stopping: tokio_util::sync::CancellationToken,
    /// The `mcp` executors' upstreams and their connection pools.
    pub mcp: crate::executor::mcp::McpExecutors,
    /// Bumped whenever what a resolve may allow changes (the atlases in force replaced, an
    /// approval decided): MCP clients are told their tool list changed ([`crate::mcp`]).
    pub tool_lists: tokio::sync::watch::Sender<u64>,
    /// Whether this replica leads the periodic work (retention): always on the embedded store;
    /// on PostgreSQL, while it holds the leader lock (`crate::leader`).
    pub leading: Arc<tokio::sync::watch::Sender<bool>>,
    /// The transparency log: its tree, origin, key and checkpoints.
    pub log: Arc<crate::tlog::Log>,
    /// The redaction rules in force (`[[redaction.rules]]`).
    pub redactor: cra_atlas::redaction::Redactor,
    /// What keeps this replica from being fully ready while it still serves (a reload that
    /// failed and left the last good set in force), by kind; `/v1/health/ready` reports them.
    pub problems: std::sync::Mutex<std::collections::BTreeMap<Problem, String>>,
}

/// A kind of problem `/v1/health/ready` reports as `degraded` (a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// The last `--watch` reload of the atlases failed; the last good set is in force.
    AtlasReload,
    /// The last reload of the keys file or JWT settings failed; the last good ones are in force.
    KeysReload,
}

impl Problem {
    /// How the problem is named in `/v1/health/ready`'s `problems`.
    pub fn name(self) -> &'static str {
        match self {
            Problem::AtlasReload => "atlas reload failed",
            Problem::KeysReload => "keys reload failed",
        }
    }
}

impl Runtime {
    /// Records that `problem` now holds (`Some(why)`) or no longer does (`None`).
    pub fn problem(&self, problem: Problem, why: Option<String>) {
        let mut problems = self
            .problems
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match why {
            Some(why) => problems.insert(problem, why),
            None => problems.remove(&problem),
        };
    }

    /// The problems that hold now, each as `<name>: <why>`.
    pub fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(p, why)| format!("{}: {why}", p.name()))
            .collect()
    }

    /// Says that what a resolve may allow has changed (`tool_lists`).
    pub fn tool_lists_changed(&self) {
        self.tool_lists.send_modify(|generation| *generation += 1);
    }

    /// Runs a store read, or the queueing of an append, where it costs least: on the calling
    /// async worker when the backend's reads never wait ([`Backends::quick_reads`]: a hop to the
    /// blocking pool and back cost more than a redb read), otherwise on the blocking pool. Never
    /// use it for a write that may wait for the store's writer. A panic becomes a 500 naming
    /// `what` either way.
    ///
    /// [`Backends::quick_reads`]: crate::backend::Backends::quick_reads
    pub async fn quick<T, F>(&self, what: &'static str, f: F) -> crate::error::ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if self.backends.quick_reads {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .map_err(|_| crate::error::ApiError::internal(what, "the task panicked"))
        } else {
            crate::error::run_blocking(what, f).await
        }
    }
}

/// A cheap handle on the [`Runtime`], cloned into every handler.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<Runtime>);

impl Deref for AppState {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.0
    }
}
